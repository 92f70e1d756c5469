"""The compiled step bookkeeping (simulator/core/batch_kernels.py) against the numpy expressions it replaced."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.core.batch_kernels import (
    advance_prefill,
    emit_decoded,
    finished_rows,
    plan_prefill,
    verifiable,
    within,
)


def random_batch(rng: np.random.Generator, n: int, capacity: int):
    """Columns of a batch of n rows (capacity rows allocated, the rest garbage): some rows still prefill."""
    prompt = rng.integers(1, 3000, capacity)
    output = rng.integers(2, 600, capacity)
    generated = np.minimum(rng.integers(0, 600, capacity), output - 1)
    to_prefill = np.where(rng.random(capacity) < 0.3, rng.integers(1, 3000, capacity), 0)
    return to_prefill, output, generated, prompt, rng.integers(0, 10**6, capacity)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 300), st.integers(0, 9), st.integers(1, 20000), st.integers(1, 4096), st.integers(0, 2**32 - 1))
def test_plan_prefill_equals_the_array_expressions(n, gamma, max_batch_tokens, prefill_chunk, seed):
    rng = np.random.default_rng(seed)
    to_prefill, output, generated, prompt, rid = random_batch(rng, n, n + 5)
    dec, remaining, context, ids, chunks, total, left, kv_decode, held = plan_prefill(
        to_prefill, output, generated, prompt, rid, n, gamma, max_batch_tokens, prefill_chunk)

    tp = to_prefill[:n]
    want_dec = np.flatnonzero(tp == 0)
    want_rem = output[want_dec] - generated[want_dec]
    budget = max_batch_tokens - len(want_dec) - int(np.minimum(gamma, want_rem - 1).sum())
    want = np.minimum(tp, prefill_chunk)
    want_chunks = np.clip(budget - (np.cumsum(want) - want), 0, want)
    assert np.array_equal(dec, want_dec) and np.array_equal(remaining, want_rem)
    assert np.array_equal(context, prompt[want_dec] + generated[want_dec]) and np.array_equal(ids, rid[want_dec])
    assert np.array_equal(chunks, want_chunks) and total == want_chunks.sum() and left == tp.sum()
    assert kv_decode == context.sum()
    assert held == (prompt[:n] + generated[:n] - tp)[want_chunks > 0].sum()
    # what the cap allows: the decoding rows' worst case plus the chunks never exceed it, unless the worst case
    # alone does (then nothing prefills)
    worst = len(want_dec) + int(np.minimum(gamma, want_rem - 1).sum())
    assert total == 0 or worst + total <= max_batch_tokens
    assert np.all(chunks <= np.minimum(tp, prefill_chunk))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 300), st.integers(0, 2**32 - 1))
def test_emit_and_advance_equal_the_array_expressions(n, seed):
    rng = np.random.default_rng(seed)
    to_prefill, _, generated, _, _ = random_batch(rng, n, n + 5)
    accepted_total = rng.integers(0, 100, n + 5)
    decode_steps = rng.integers(0, 100, n + 5)
    dec = np.flatnonzero(to_prefill[:n] == 0)
    accepted = rng.integers(0, 8, len(dec))
    chunks = np.minimum(to_prefill[:n], rng.integers(0, 3000, n))

    want_gen, want_acc, want_steps, want_left = generated.copy(), accepted_total.copy(), decode_steps.copy(), to_prefill.copy()
    want_gen[dec] += accepted + 1
    want_acc[dec] += accepted
    want_steps[dec] += 1
    prefilling = want_left[:n] > 0
    want_left[:n] -= chunks
    completed = prefilling & (want_left[:n] == 0)
    want_gen[:n] += completed

    assert emit_decoded(dec, accepted, generated, accepted_total, decode_steps) == accepted.sum()
    done = advance_prefill(to_prefill, chunks, generated, n)
    assert np.array_equal(done, np.flatnonzero(completed))
    for got, want in ((generated, want_gen), (accepted_total, want_acc), (decode_steps, want_steps),
                      (to_prefill, want_left)):
        assert np.array_equal(got, want)  # rows past n untouched too


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 300), st.integers(0, 9), st.integers(0, 2**32 - 1))
def test_verifiable_equals_the_array_expressions(rows, gamma, seed):
    rng = np.random.default_rng(seed)
    conf = rng.random((rows, gamma))
    conf[rng.random((rows, gamma)) < 0.05] = np.nan  # a masked NaN stays NaN, as NaN * 0 does
    remaining = rng.integers(1, 12, rows) if rng.random() < 0.7 else np.full(rows, gamma + 1)
    maxl, masked = verifiable(conf, remaining, gamma)
    want = np.minimum(gamma, remaining - 1)
    assert np.array_equal(maxl, want)
    assert np.array_equal(masked, conf * (np.arange(gamma)[None, :] < want[:, None]), equal_nan=True)
    if rows and want.min() == gamma:
        assert masked is conf  # nothing to mask: no copy


def test_within_is_zero_to_hi_inclusive():
    hi = np.array([0, 3, 7], dtype=np.int64)
    assert within(np.array([0, 3, 7], dtype=np.int64), hi) and within(np.array([0, 0, 0], dtype=np.int64), hi)
    assert not within(np.array([0, 4, 7], dtype=np.int64), hi)
    assert not within(np.array([-1, 0, 0], dtype=np.int64), hi)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 300), st.integers(0, 2**32 - 1))
def test_finished_rows_and_drop_equal_the_array_expressions(n, seed):
    from simulator.core.columns import Batch, Field

    rng = np.random.default_rng(seed)
    _, output, generated, prompt, _ = random_batch(rng, n, n + 5)
    generated = np.where(rng.random(n + 5) < 0.1, output + rng.integers(0, 3, n + 5), generated)
    rows, freed = finished_rows(generated, output, prompt, n)
    done = generated[:n] >= output[:n]
    assert np.array_equal(rows, np.flatnonzero(done)) and freed == (prompt[:n] + output[:n])[done].sum()

    b = Batch({"x": Field(np.int64, batch="copy"), "t": Field(np.float64, batch="copy")}, {}, n + 5)
    b.n = n
    b.rid[:] = np.arange(n + 5)
    b.x[:] = rng.integers(0, 100, n + 5)
    b.t[:] = rng.random(n + 5)
    want = {k: getattr(b, k)[:n][~done].copy() for k in b.names}
    b.drop(rows)
    assert b.n == n - len(rows) and all(np.array_equal(b.col(k), want[k]) for k in b.names)
