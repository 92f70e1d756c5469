"""DSpark's hardware-aware prefix scheduler (paper, Algorithm 1), compiled over the batch.

Candidates are the draft positions (r, j) with prefix survival a[r, j] = prod_{i<=j} c[r, i] > 0, taken in the order
(-a, r, j). Because a is non-increasing along j and ties keep j ascending, every prefix of that order assigns each
request a contiguous prefix, so "the first n candidates" is a valid verification plan for every n. Taking n of
them gives B = R + n tokens and expected emitted tokens tau = R + (sum of their a), and the objective is
Theta(n) = tau * SPS(B).

- early_stop=True (Algorithm 1): admit candidates while Theta rises strictly; stop at the first non-rise. The
  decision to admit position j never looks at a candidate after it, which is what keeps it lossless (Appendix A).
- early_stop=False (the retrospective "global" search): the first n that maximises Theta. For a fixed B the best
  plan is the top B - R candidates, so this is the exact optimum over all length vectors, for any SPS curve.

How it runs: one numba kernel (``_walk``) forms the survivals, orders them (``candidate_order``) and walks them.
With an SPS that can be priced on its grid (``PricedOnGrid``: the engine's ``StepCost``) it prices SPS(B) as it
goes, with the step-time table's own compiled rule (CUDA-graph stairs included), so a walk that stops early prices
only the B it reached; any other SPS callable is tabulated once over every B the walk may reach (R to
R x (gamma + 1)) and walked the same way. tests/simulator/algorithm1.py is the plain-Python
transcription the tests hold it to.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

import hw_profile.tables.step_table
from hw_profile.tables.cuda_graphs import NO_GRAPHS
from hw_profile.tables.step_table import graph_batch, k_rows, step_ms_at, verify_ms_at
from simulator.core.kernel_cache import guard_cached_kernel
from simulator.core.policies import candidate_order
from simulator.core.policies.candidate_order import descending_stable

SPS = Callable[[np.ndarray], np.ndarray]
EARLY_STOP, GLOBAL, TOP_K = 0, 1, 2


def greedy_prefix_lengths(confidence: np.ndarray, sps: SPS, early_stop: bool = True) -> np.ndarray:
    """Per-request verification lengths l (R,) maximising Theta = tau * SPS(B).

    confidence: (R, gamma) conditional confidences in [0, 1]; 0 where a position must not be verified.
    sps: callable from an int array of total verification tokens B (anchors included, so B starts at R) to steps
         per second.
    """
    c = _as_matrix(confidence)
    mode = EARLY_STOP if early_stop else GLOBAL
    walk_terms = getattr(sps, "walk_terms", None)  # ``PricedOnGrid``, without isinstance's per-call protocol scan
    if walk_terms is not None:  # exactly the engine's rule: priced inside the walk, only as far as it goes
        b_axis, k_axis, ms, graphs, kv, prefill, fixed, verify = walk_terms()
        return _walk(c, mode, 0, _NONE, b_axis, k_axis, ms, kv, prefill, fixed, verify, graphs)
    rows, gamma = c.shape
    if c.size == 0:
        return np.zeros(rows, dtype=np.int64)
    batch = np.arange(rows, rows * (gamma + 1) + 1)
    rates = np.ascontiguousarray(np.broadcast_to(np.asarray(sps(batch), dtype=np.float64), batch.shape))
    return _walk(c, mode, 0, rates, _NONE, _NONE, _NO_GRID, 0.0, 0.0, 0.0, _NO_VERIFY, NO_GRAPHS)


def top_k_prefix_lengths(confidence: np.ndarray, capacity: int) -> np.ndarray:
    """The first ``capacity`` candidates of the admission order, as per-request lengths (dspark-async)."""
    return _walk(_as_matrix(confidence), TOP_K, max(int(capacity), 0), _NONE, _NONE, _NONE, _NO_GRID, 0.0, 0.0, 0.0,
                 _NO_VERIFY, NO_GRAPHS)


_NONE = np.zeros(0)
_NO_GRID = np.zeros((0, 0))
_NO_VERIFY = (0.0,) * 8  # StepTimeGrid.verify_terms + (rows, verify_kv): no correction


def _as_matrix(confidence: np.ndarray) -> np.ndarray:
    c = np.asarray(confidence, dtype=float)
    if c.ndim != 2:
        raise ValueError(f"confidence must be (R, gamma), got shape {c.shape}")
    return c if c.flags.c_contiguous else np.ascontiguousarray(c)


@njit(cache=True)
def _walk(c, mode, capacity, rates, b_axis, k_axis, ms, kv, prefill, fixed, verify, graphs):
    """Walk the candidates in (-a, r, j) order; lengths (R,) for ``mode``. EARLY_STOP and GLOBAL read SPS(B) for
    B = R + n from ``rates[n]`` when it is given, else price 1000 / (T(B + prefill, kv) + V(B) + fixed) on the grid
    (b_axis, k_axis, ms) at the B its captured CUDA graphs replay it at (``graphs``: sizes, counts requests, eager
    floor; ``priced_step_ms_at``), V the grid's verification correction (``verify``: its terms, rows and the
    decoding rows' KV tokens; ``verify_ms_at``); TOP_K takes the first ``capacity`` candidates."""
    q_table, att_kv, att_query, att_request, att_window, att_share, att_rows, att_k = verify
    sizes, per_request, floor = graphs
    prompts = prefill > 0.0
    rows, gamma = c.shape
    # the positive-survival candidates in (r, j) order, with their row; a never rises along j, so once it is 0 the
    # rest of the row is 0 too, yet every confidence is still checked
    a = np.empty(rows * gamma)
    row = np.empty(rows * gamma, dtype=np.int64)
    m = 0
    for r in range(rows):
        s = 1.0
        for j in range(gamma):
            x = c[r, j]
            if not (x >= 0.0 and x <= 1.0):  # also rejects NaN
                raise ValueError("confidence must lie in [0, 1]")
            s *= x
            if s > 0.0:
                a[m] = s
                row[m] = r
                m += 1
    lengths = np.zeros(rows, dtype=np.int64)
    if m == 0:
        return lengths
    order = descending_stable(a[:m])

    if mode == TOP_K:
        take = min(max(capacity, 0), m)
    else:
        tabulated = rates.shape[0] > 0
        lo, hi, w = (0, 0, 0.0) if tabulated else k_rows(k_axis, kv)
        seg = 0  # B only grows along the walk: the table's segment and the captured size only move forward
        at = 0
        staired = sizes.shape[0] > 0
        if tabulated:
            rate = rates[0]
        else:
            b = float(rows) + prefill
            eager = False
            if staired:  # the B the step replays at (``priced_step_ms_at``, unrolled to keep one lookup here)
                b, eager, at = graph_batch(b, att_rows, prompts, sizes, per_request, at)
            t, seg = step_ms_at(b_axis, ms, lo, hi, w, b, seg)
            if eager and t < floor:
                t = floor
            t += verify_ms_at(float(rows), att_rows, att_k, q_table, att_kv, att_query, att_request, att_window,
                              att_share)
            rate = 1000.0 / (t + fixed)
        best = float(rows) * rate
        gained = 0.0
        take = 0
        for n in range(1, m + 1):
            gained += a[order[n - 1]]
            if tabulated:
                rate = rates[n]
            else:
                b = float(rows + n) + prefill
                if staired:
                    b, eager, at = graph_batch(b, att_rows, prompts, sizes, per_request, at)
                t, seg = step_ms_at(b_axis, ms, lo, hi, w, b, seg)
                if eager and t < floor:
                    t = floor
                t += verify_ms_at(float(rows + n), att_rows, att_k, q_table, att_kv, att_query, att_request, att_window,
                                  att_share)
                rate = 1000.0 / (t + fixed)
            theta = (float(rows) + gained) * rate
            if theta > best:  # a strict rise (GLOBAL: so the first maximum is kept)
                best = theta
                take = n
            elif mode == EARLY_STOP:
                break
    for n in range(take):
        lengths[row[order[n]]] += 1
    return lengths


# _walk compiles in the table's pricing rule and the candidate order from their own files
guard_cached_kernel(_walk, hw_profile.tables.step_table, candidate_order)
