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
