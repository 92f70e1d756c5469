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

How it runs: a numba kernel sorts the candidates with a counting sort on buckets of a (linear in R x gamma) and
walks them; with the engine's ``StepRate`` it also prices SPS(B) inside the kernel (the same
piecewise-linear arithmetic as ``StepCurve``). Any other SPS callable takes the numpy path (a stable argsort, SPS
priced in growing chunks), which gives the same lengths: both accumulate tau in the same chunks, so even the
rounding agrees, and the tests hold them to each other and to the plain-Python ``algorithm1_reference``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from simulator.policies.base import StepRate

SPS = Callable[[np.ndarray], np.ndarray]
EARLY_STOP, GLOBAL, TOP_K = 0, 1, 2


def greedy_prefix_lengths(confidence: np.ndarray, sps: SPS, early_stop: bool = True) -> np.ndarray:
    """Per-request verification lengths l (R,) maximising Theta = tau * SPS(B).

    confidence: (R, gamma) conditional confidences in [0, 1]; 0 where a position must not be verified.
    sps: callable from an int array of total verification tokens B (anchors included, so B starts at R) to steps
         per second.
    """
    c = _as_matrix(confidence)
    if type(sps) is StepRate:
        lo, hi, w = sps.grid.row_blend(sps.kv)  # the kernel blends T(B) at this K itself: no numpy row per step
        return _walk(c, EARLY_STOP if early_stop else GLOBAL, 0, sps.grid.b_axis, lo, hi, w, float(sps.prefill),
                     float(sps.fixed_ms))
    return _numpy_prefix_lengths(_checked(c), sps, early_stop)


def top_k_prefix_lengths(confidence: np.ndarray, capacity: int) -> np.ndarray:
    """The first ``capacity`` candidates of the admission order, as per-request lengths (dspark-async)."""
    return _walk(_as_matrix(confidence), TOP_K, max(int(capacity), 0), _NO_AXIS, _NO_AXIS, _NO_AXIS, 0.0, 0.0, 0.0)


_NO_AXIS = np.zeros(1)


def _as_matrix(confidence: np.ndarray) -> np.ndarray:
    c = np.asarray(confidence, dtype=float)
    if c.ndim != 2:
        raise ValueError(f"confidence must be (R, gamma), got shape {c.shape}")
    return c if c.flags.c_contiguous else np.ascontiguousarray(c)


def _checked(c: np.ndarray) -> np.ndarray:
    if c.size and not (c.min() >= 0.0 and c.max() <= 1.0):  # also rejects NaN
        raise ValueError("confidence must lie in [0, 1]")
    return c


# --- the compiled walk ------------------------------------------------------------------------------------------


@njit(cache=True)
def _walk(c, mode, capacity, b_axis, ms_lo, ms_hi, w, prefill, fixed):
    """Walk the candidates in (-a, r, j) order; lengths (R,) for ``mode``: EARLY_STOP and GLOBAL price
    SPS(B) = 1000 / (StepCurve(B + prefill) + fixed) on the curve (b_axis, ms), ms the grid's row at this K blended
    from (ms_lo, ms_hi, w) as ``StepTimeGrid.row`` does; TOP_K takes the first ``capacity`` candidates."""
    rows, gamma = c.shape
    for r in range(rows):
        for j in range(gamma):
            if not (c[r, j] >= 0.0 and c[r, j] <= 1.0):  # also rejects NaN
                raise ValueError("confidence must lie in [0, 1]")
    lengths = np.zeros(rows, dtype=np.int64)
    if rows == 0 or gamma == 0:
        return lengths
    # the positive-survival candidates, flat index r * gamma + j ascending, with a as np.cumprod forms it
    a = np.empty(rows * gamma)
    flat = np.empty(rows * gamma, dtype=np.int64)
    m = 0
    for r in range(rows):
        s = c[r, 0]
        for j in range(gamma):
            if j:
                s *= c[r, j]
            if not s > 0.0:  # a never rises along j: the rest of the row is 0 too
                break
            a[m] = s
            flat[m] = r * gamma + j
            m += 1
    order = _descending_stable(a[:m])

    nb = b_axis.shape[0]
    ms = np.empty(nb)
    for i in range(nb):
        if w > 1.0:
            d = ms_hi[i] - ms_lo[i]
            ms[i] = ms_hi[i] + (d if d > 0.0 else 0.0) * (w - 1.0)
        else:
            ms[i] = ms_lo[i] + (ms_hi[i] - ms_lo[i]) * w
    slope = 0.0  # StepCurve.last_slope
    if nb >= 2:
        s = (ms[nb - 1] - ms[nb - 2]) / (b_axis[nb - 1] - b_axis[nb - 2])
        slope = 0.0 if 0.0 > s else s
    seg = 0  # SPS is priced at increasing B: the curve's segment only moves forward
    take = m if mode == EARLY_STOP else 0
    tau0, partial, best = float(rows), 0.0, 0.0
    # Algorithm 1 sums tau in chunks exactly as the numpy path does, so that both round alike
    chunk = max(2 * rows, 64)
    chunk_end = chunk
    if mode == TOP_K:
        take = min(max(capacity, 0), m)
    else:
        theta0, seg = _sps(rows, b_axis, ms, slope, prefill, fixed, 0)
        best = float(rows) * theta0
        for n in range(m):
            g = a[order[n]]
            if mode == EARLY_STOP:
                if n == chunk_end:
                    tau0 = partial + tau0
                    partial = 0.0
                    chunk *= 4
                    chunk_end = n + chunk
                partial += g
                rate, seg = _sps(rows + n + 1, b_axis, ms, slope, prefill, fixed, seg)
                theta = (partial + tau0) * rate
                if theta <= best:
                    take = n
                    break
                best = theta
            else:
                partial += g
                rate, seg = _sps(rows + n + 1, b_axis, ms, slope, prefill, fixed, seg)
                theta = (float(rows) + partial) * rate
                if theta > best:  # the first maximum
                    best = theta
                    take = n + 1
    for n in range(take):
        lengths[flat[order[n]] // gamma] += 1
    return lengths


_RADIX_BITS = 11


@njit(cache=True)
def _descending_stable(a):
    """Positions of a (all in (0, 1]) sorted by descending value, equal values in ascending position.

    One stable counting pass on buckets (as many as a power of two near 2 m), then one insertion pass that settles
    each bucket's few members on the whole value: linear in practice. The buckets are slices of value, floor(a K),
    when most values lie within two decades of 1 (the usual case); when many lie below that (a weak drafter's long
    blocks), they are slices of the key bits(1.0) - bits(a) (a positive double orders like its bit pattern, so the
    key ascending is a descending), whose top bits span every decade present. Either way the buckets come in
    descending order of value. When many values share a bucket yet differ (confidences equal up to 1e-7 but not
    exactly), the insertion pass would grow quadratically: past a budget of moves it gives up and an LSD radix
    sort on every bit of the key orders them instead, still linear."""
    m = a.shape[0]
    key = np.uint64(0x3FF0000000000000) - a.view(np.uint64)
    bits = 6
    while (1 << bits) < 2 * m and bits < 16:
        bits += 1
    top = np.uint64(0)
    small = 0
    for i in range(m):
        top = max(top, key[i])
        small += a[i] < 0.01
    by_value = 4 * small < m
    buckets = 1 << bits
    shift = np.uint64(0)
    while (top >> shift) >= np.uint64(buckets):
        shift += np.uint64(1)
    count = np.zeros(buckets + 2, dtype=np.int64)
    for i in range(m):
        count[_bucket(a[i], key[i], by_value, buckets, shift) + 1] += 1
    for d in range(1, buckets + 2):
        count[d] += count[d - 1]
    order = np.empty(m, dtype=np.int64)
    for i in range(m):  # positions ascending within a bucket: the pass is stable
        d = _bucket(a[i], key[i], by_value, buckets, shift)
        order[count[d]] = i
        count[d] += 1
    moved = 0
    for i in range(1, m):  # stable insertion on the whole key: moves only within a bucket
        k = order[i]
        if key[k] < key[order[i - 1]]:
            h = i
            while h > 0 and key[order[h - 1]] > key[k]:
                order[h] = order[h - 1]
                h -= 1
            order[h] = k
            moved += i - h
            if moved > 8 * m + 64:
                return _radix_sort(key)
    return order


@njit(cache=True, inline="always")
def _bucket(a, key, by_value, buckets, shift):
    """The bucket of a value (0 for the largest): buckets - floor(a * buckets) (a power of two: exact), or the
    key's top bits."""
    if by_value:
        return buckets - np.int64(a * buckets)
    return np.int64(key >> shift)


@njit(cache=True)
def _radix_sort(key):
    """Positions of ``key`` (below 2^66) stably sorted: an LSD radix sort in six 11-bit digits."""
    m = key.shape[0]
    order = np.arange(m)
    other = np.empty(m, dtype=np.int64)
    size = 1 << _RADIX_BITS
    count = np.zeros(size, dtype=np.int64)
    for p in range(6):
        shift = np.uint64(p * _RADIX_BITS)
        count[:] = 0
        for i in range(m):
            count[(key[i] >> shift) & np.uint64(size - 1)] += 1
        if count.max() == m:  # every key has this digit: the pass would not move anything
            continue
        total = 0
        for d in range(size):
            c = count[d]
            count[d] = total
            total += c
        for i in range(m):
            k = order[i]
            d = (key[k] >> shift) & np.uint64(size - 1)
            other[count[d]] = k
            count[d] += 1
        order, other = other, order
    return order


@njit(cache=True, inline="always")
def _sps(batch, b_axis, ms, slope, prefill, fixed, seg):
    """StepRate(B) for one B with np.interp's and StepCurve's arithmetic; ``seg`` is a segment at or before B's
    (returned updated for the next, larger B)."""
    x = float(batch) + prefill
    n = b_axis.shape[0]
    last = b_axis[n - 1]
    if x > last:
        t = ms[n - 1] + slope * (x - last)
    elif n == 1 or x < b_axis[0]:
        t = ms[0]
    elif x == last:
        t = ms[n - 1]
    else:
        while b_axis[seg + 1] <= x:
            seg += 1
        if b_axis[seg] == x:
            t = ms[seg]
        else:
            t = (ms[seg + 1] - ms[seg]) / (b_axis[seg + 1] - b_axis[seg]) * (x - b_axis[seg]) + ms[seg]
    return 1000.0 / (t + fixed), seg


# --- the numpy path (any SPS callable) --------------------------------------------------------------------------


def _numpy_prefix_lengths(c: np.ndarray, sps: SPS, early_stop: bool) -> np.ndarray:
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


def admission_order(confidence: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices r * gamma + j of the positive-survival candidates in (-a, r, j) order, and their a."""
    a = np.cumprod(_checked(_as_matrix(confidence)), axis=1).ravel()
    order = _stable_descending(a)[: int(np.count_nonzero(a))]  # a >= 0: the positives sort first
    return order, a[order]


def _stable_descending(a: np.ndarray) -> np.ndarray:
    # Non-negative doubles order like their bit patterns read as int64, and a stable integer argsort is faster
    # than a float one; stability keeps equal a in ascending index, i.e. (r, j), order.
    return np.argsort(-a.view(np.int64), kind="stable")


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
