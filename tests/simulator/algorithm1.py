"""A plain-Python transcription of the paper's Algorithm 1, line by line: the ground truth the compiled greedy
(simulator/core/policies/greedy.py) is tested against, and the baseline benchmarks/bench_engine.py measures it against."""

from __future__ import annotations

from collections.abc import Callable


def algorithm1_reference(confidence: list[list[float]], sps: Callable[[int], float], early_stop: bool = True) -> list[int]:
    """Per-request lengths: candidates (r, j) by descending prefix survival a (ties: r, then j ascending), admitted
    while Theta = tau * SPS(B) rises (early_stop), or the first maximum of Theta over all prefixes of that order.
    tau = R + the sum of the admitted a, summed in admission order."""
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
    gained = 0.0
    theta_best = rows * sps(rows)
    for neg_a, r, j in cands:
        lengths[r] = j
        batch += 1
        gained += -neg_a
        theta = (rows + gained) * sps(batch)
        if theta > theta_best:
            theta_best = theta
            best = list(lengths)
        elif early_stop:
            break
    return best
