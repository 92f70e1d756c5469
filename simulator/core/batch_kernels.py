"""Compiled bookkeeping of a replica's step over its batch columns (``Replica.plan_batch``, ``apply_outcomes``).

A speculative run keeps a few requests prefilling in almost every step (requests finish tau times as often per
step as without speculation, and each successor prefills), so the batch's decoding rows are an index array and
the numpy form of these phases is a dozen small fancy-indexed operations per step, each paying numpy's per-call
overhead. Each function here is one pass over the batch with the same integer arithmetic; the tests hold them to
the numpy expressions they replace.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def plan_prefill(to_prefill, output, generated, prompt, rid, n, gamma, max_batch_tokens, prefill_chunk):
    """The decoding rows of a batch in which some rows still prefill, and this step's prefill chunks.

    Rows 0..n-1; a row decodes when ``to_prefill`` is 0. Every decoding row reserves its worst case, 1 +
    min(gamma, remaining - 1) tokens, out of ``max_batch_tokens``; what is left goes to the prefilling rows in
    admission order, at most ``prefill_chunk`` each. Returns (decode rows, their remaining tokens, their context,
    their request ids, prefill chunk per row (n,), prefill tokens in all, prompt tokens not yet prefilled, the
    decoding rows' context in all, the tokens the rows with a chunk this step already hold)."""
    rows = 0
    for i in range(n):
        if to_prefill[i] == 0:
            rows += 1
    dec = np.empty(rows, dtype=np.int64)
    remaining = np.empty(rows, dtype=np.int64)
    context = np.empty(rows, dtype=np.int64)
    ids = np.empty(rows, dtype=np.int64)
    worst = 0
    left = 0
    kv_decode = 0
    k = 0
    for i in range(n):
        if to_prefill[i] == 0:
            rem = output[i] - generated[i]
            dec[k] = i
            remaining[k] = rem
            context[k] = prompt[i] + generated[i]
            kv_decode += context[k]
            ids[k] = rid[i]
            worst += min(gamma, rem - 1)
            k += 1
        else:
            left += to_prefill[i]
    budget = max_batch_tokens - rows - worst
    chunks = np.empty(n, dtype=np.int64)
    before = 0  # prompt tokens the earlier rows want
    total = 0
    held = 0
    for i in range(n):
        want = min(to_prefill[i], prefill_chunk)
        c = budget - before
        c = 0 if c < 0 else (want if c > want else c)
        chunks[i] = c
        total += c
        before += want
        if c > 0:
            held += prompt[i] + generated[i] - to_prefill[i]
    return dec, remaining, context, ids, chunks, total, left, kv_decode, held


@njit(cache=True)
def emit_decoded(rows, accepted, generated, accepted_total, decode_steps):
    """Decoding rows ``rows`` emit their accepted draft tokens plus one target token: the batch columns
    ``generated``, ``accepted_total`` and ``decode_steps`` are updated in place. Returns the accepted tokens."""
    total = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        a = accepted[i]
        generated[r] += a + 1
        accepted_total[r] += a
        decode_steps[r] += 1
        total += a
    return total


@njit(cache=True)
def advance_prefill(to_prefill, chunks, generated, n):
    """Rows 0..n-1 prefill their chunks; a row whose prompt is now all prefilled emits its first token
    (``generated`` + 1). Returns those rows."""
    done = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        if to_prefill[i] > 0:
            to_prefill[i] -= chunks[i]
            if to_prefill[i] == 0:
                generated[i] += 1
                done[k] = i
                k += 1
    return done[:k]


@njit(cache=True)
def finished_rows(generated, output, prompt, n):
    """Rows 0..n-1 that have emitted their whole output, and the KV tokens they hold (prompt + output)."""
    rows = np.empty(n, dtype=np.int64)
    k = 0
    freed = 0
    for i in range(n):
        if generated[i] >= output[i]:
            rows[k] = i
            k += 1
            freed += prompt[i] + output[i]
    return rows[:k], freed


@njit(cache=True)
def verifiable(confidence, remaining, gamma):
    """Per decoding row, the most draft tokens it may verify, min(gamma, remaining - 1), and the confidences with
    the positions past that multiplied by 0 (a new array when any is; else the same one)."""
    rows = remaining.shape[0]
    max_lengths = np.empty(rows, dtype=np.int64)
    short = False
    for i in range(rows):
        m = min(gamma, remaining[i] - 1)
        max_lengths[i] = m
        short |= m < gamma
    if not short:
        return max_lengths, confidence
    masked = np.empty_like(confidence)
    for i in range(rows):
        for j in range(confidence.shape[1]):
            masked[i, j] = confidence[i, j] * (1.0 if j < max_lengths[i] else 0.0)
    return max_lengths, masked


@njit(cache=True)
def within(counts, hi):
    """0 <= counts[i] <= hi[i] for every i (int64 arrays of one length)."""
    for i in range(counts.shape[0]):
        if counts[i] < 0 or counts[i] > hi[i]:
            return False
    return True
