"""The order in which the greedy admits draft positions: prefix survivals sorted by descending value, equal values
in ascending position (numpy's ``argsort(-a, kind="stable")``), in time linear in the number of candidates.

A step's survivals are a few thousand values in (0, 1]; a comparison sort on them would cost more than the whole
walk that reads them. ``descending_stable`` sorts them with one counting pass on buckets, one insertion pass inside
the buckets and, when that pass meets too many near-equal values, an LSD radix sort on the bit patterns.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_RADIX_BITS = 11


@njit(cache=True)
def descending_stable(a):
    """Positions of a (all in (0, 1]) sorted by descending value, equal values in ascending position.

    One stable counting pass on buckets (as many as a power of two at or above m), then one insertion pass that
    settles each bucket's few members on the whole value: linear in practice. The buckets are slices of value,
    floor(a K), when most values lie within two decades of 1 (the usual case); when many lie below that (a weak
    drafter's long blocks), they are slices of the key bits(1.0) - bits(a) (a positive double orders like its bit
    pattern, so the key ascending is a descending), whose top bits span every decade present. Either way the
    buckets come in descending order of value. When many values share a bucket yet differ (confidences equal up to
    1e-7 but not exactly), the insertion pass would grow quadratically: past a budget of moves it gives up and an
    LSD radix sort on every bit of the key orders them instead, still linear."""
    m = a.shape[0]
    if m == 0:
        return np.empty(0, dtype=np.int64)
    bits = 6
    while (1 << bits) < m and bits < 16:
        bits += 1
    buckets = 1 << bits
    count = np.zeros(buckets + 2, dtype=np.int64)
    bucket = np.empty(m, dtype=np.int64)
    small = 0
    for i in range(0, m, 8):  # a sample says how many values lie below two decades (it steers speed, not order)
        small += a[i] < 0.01
    if 4 * small < (m + 7) // 8:
        for i in range(m):
            d = buckets - np.int64(a[i] * buckets)
            bucket[i] = d
            count[d + 1] += 1
    else:  # too many would share the last slices of value: deal them by the key's top bits instead
        key = _key(a)
        top = key.max()
        shift = np.uint64(0)
        while (top >> shift) >= np.uint64(buckets):
            shift += np.uint64(1)
        for i in range(m):
            d = np.int64(key[i] >> shift)
            bucket[i] = d
            count[d + 1] += 1
    for d in range(1, buckets + 2):
        count[d] += count[d - 1]
    order = np.empty(m, dtype=np.int64)
    for i in range(m):  # positions ascending within a bucket: the pass is stable
        d = bucket[i]
        order[count[d]] = i
        count[d] += 1
    moved = 0
    for i in range(1, m):  # stable insertion on the whole value: moves only within a bucket
        k = order[i]
        v = a[k]
        if v > a[order[i - 1]]:
            h = i
            while h > 0 and a[order[h - 1]] < v:
                order[h] = order[h - 1]
                h -= 1
            order[h] = k
            moved += i - h
            if moved > 8 * m + 64:
                return _radix_sort(_key(a))
    return order


@njit(cache=True, inline="always")
def _key(a):
    """bits(1.0) - bits(a): ascending where a descends, equal where a is."""
    return np.uint64(0x3FF0000000000000) - a.view(np.uint64)


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
