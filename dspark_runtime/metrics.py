"""Acceptance and confidence metrics of full-block verification records (numpy; the confidence maths is
``simulator.core.calibration``'s, so there is one definition of ECE, AUROC and Brier in the project).

- tau: mean emitted tokens per request-step, accepted drafts + 1 (bonus included), the paper's accepted length,
  with its standard error clustered by request;
- conditional acceptance at position k: P(accepted >= k | accepted >= k - 1), the paper's Figure 2;
- prefix survival at k: P(accepted >= k);
- per position k: ECE (20 bins) of the cumulative product a_k = c_1 ... c_k against accepted >= k, and AUROC and
  Brier of c_k among the blocks that reached k (``confidence_report``), raw and STS-calibrated.
"""

from __future__ import annotations

import numpy as np

from simulator.core.calibration import confidence_report


def clustered_se(x: np.ndarray, cluster: np.ndarray | None) -> float:
    """Standard error of the mean of x, robust to correlation within clusters (the steps of one request are not
    independent draws): sqrt(sum_c (sum_{i in c} (x_i - mean))^2) / n."""
    x = np.asarray(x, dtype=float)
    n = x.size
    if n < 2:
        return float("nan")
    if cluster is None:
        return float(x.std(ddof=1) / np.sqrt(n))
    _, idx = np.unique(cluster, return_inverse=True)
    sums = np.bincount(idx, weights=x - x.mean())
    return float(np.sqrt((sums ** 2).sum()) / n)


def acceptance_metrics(accepted: np.ndarray, gamma: int, request: np.ndarray | None = None) -> dict:
    acc = np.asarray(accepted)
    ks = np.arange(1, gamma + 1)
    reached = (acc[:, None] >= ks[None, :] - 1).sum(0)
    passed = (acc[:, None] >= ks[None, :]).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cond = np.where(reached > 0, passed / np.maximum(reached, 1), np.nan)
    return {
        "blocks": int(acc.size),
        "tau": float(acc.mean() + 1) if acc.size else float("nan"),
        "tau_se": clustered_se(acc, request),
        "conditional_acceptance": [float(x) for x in cond],
        "prefix_survival": [float(x) for x in passed / max(acc.size, 1)],
        "reached": [int(x) for x in reached],
    }


def _mean(xs) -> float:
    xs = [x for x in xs if x == x]
    return float(np.mean(xs)) if xs else float("nan")


def confidence_metrics(raw: np.ndarray, calibrated: np.ndarray, accepted: np.ndarray) -> dict:
    before = confidence_report(raw, accepted)
    after = confidence_report(calibrated, accepted)
    return {
        "ece_raw": before["ece"], "ece_calibrated": after["ece"],
        "auroc_raw": before["auroc"], "auroc_calibrated": after["auroc"],
        "brier_raw": before["brier"], "brier_calibrated": after["brier"],
        "ece_raw_mean": _mean(before["ece"]), "ece_calibrated_mean": _mean(after["ece"]),
        "auroc_mean": _mean(before["auroc"]),
    }
