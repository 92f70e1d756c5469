"""verify_block: the emitted tokens follow the target exactly (chi-square), greedy follows the argmax path, the
edge cases behave, and the same statistics catch rules that are deliberately wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dspark_runtime.chi_square import goodness_of_fit
from dspark_runtime.verify import verify_block

N = 100_000  # samples per chi-square test: a few milliseconds of verify_block
PASS = 1e-3  # a correct rule passes at this level for the fixed seeds below
CAUGHT = 1e-6  # a wrong rule must fall below this


def dist(*xs: float) -> torch.Tensor:
    t = torch.tensor(xs, dtype=torch.float64)
    return t / t.sum()


# A small Markov world: p_1 for the first token, then P[x] after token x; the drafter q_1, then Q[x].
P1 = dist(0.45, 0.25, 0.2, 0.1)
Q1 = dist(0.1, 0.3, 0.2, 0.4)
P = torch.stack([dist(0.6, 0.2, 0.1, 0.1), dist(0.1, 0.1, 0.4, 0.4), dist(0.25, 0.25, 0.25, 0.25), dist(0.0, 0.5, 0.5, 0.0)])
Q = torch.stack([dist(0.2, 0.2, 0.3, 0.3), dist(0.7, 0.1, 0.1, 0.1), dist(0.4, 0.1, 0.1, 0.4), dist(0.3, 0.3, 0.2, 0.2)])
V = 4


def draft_block(rows: int, gamma: int, gen: torch.Generator, p1=P1, q1=Q1):
    """Sample x_j ~ q_j(. | x_{j-1}) and lay out the target's and drafter's distributions along the block."""
    tokens = torch.empty(rows, gamma, dtype=torch.long)
    qs = torch.empty(rows, gamma, V, dtype=torch.float64)
    ps = torch.empty(rows, gamma + 1, V, dtype=torch.float64)
    ps[:, 0] = p1
    prev = None
    for j in range(gamma):  # sequential by nature: x_j's distribution depends on x_{j-1}
        qs[:, j] = q1 if prev is None else Q[prev]
        tokens[:, j] = torch.multinomial(qs[:, j], 1, generator=gen).squeeze(-1)
        prev = tokens[:, j]
        ps[:, j + 1] = P[prev]
    return ps, qs, tokens


def first_emitted(tokens, accepted, next_token) -> torch.Tensor:
    if tokens.shape[1] == 0:
        return next_token
    return torch.where(accepted > 0, tokens[:, 0], next_token)


def counts_of(x: torch.Tensor, k: int) -> np.ndarray:
    return torch.bincount(x, minlength=k).numpy()


@pytest.mark.parametrize("gamma,length", [(3, 0), (3, 1), (3, 2), (3, 3), (1, 1), (0, 0)])
def test_first_token_follows_target_for_each_length(gamma, length):
    gen = torch.Generator().manual_seed(100 + 10 * gamma + length)
    ps, qs, tokens = draft_block(N, gamma, gen)
    lengths = torch.full((N,), length, dtype=torch.long)
    accepted, nxt = verify_block(ps, qs, tokens, lengths, generator=gen)
    assert int(accepted.max()) <= length
    if length:  # the rule really accepts and rejects at these distributions
        assert 0 < float((accepted > 0).float().mean()) < 1
    assert goodness_of_fit(counts_of(first_emitted(tokens, accepted, nxt), V), P1.numpy()) > PASS


def test_first_token_follows_target_with_mixed_lengths_in_one_batch():
    gen = torch.Generator().manual_seed(7)
    ps, qs, tokens = draft_block(N, 4, gen)
    lengths = torch.randint(0, 5, (N,), generator=gen)
    accepted, nxt = verify_block(ps, qs, tokens, lengths, generator=gen)
    assert torch.all(accepted <= lengths)
    emitted = first_emitted(tokens, accepted, nxt)
    for k in range(5):  # each length on its own, and all together
        sel = lengths == k
        assert goodness_of_fit(counts_of(emitted[sel], V), P1.numpy()) > PASS
    assert goodness_of_fit(counts_of(emitted, V), P1.numpy()) > PASS


def two_token_stream(lengths1: torch.Tensor, lengths2: torch.Tensor, gen: torch.Generator, verify=verify_block):
    """The first two tokens a request emits over up to two decoding steps: step 1 drafts a block of two from the
    start; if it emitted only one token y, step 2 drafts one token after y and verifies lengths2 of it."""
    rows = len(lengths1)
    ps, qs, tokens = draft_block(rows, 2, gen)
    acc, nxt = verify(ps, qs, tokens, lengths1, generator=gen)
    first = first_emitted(tokens, acc, nxt)
    second_here = torch.where(acc >= 2, tokens[:, 1], nxt)  # valid where acc >= 1
    # step 2 from context y = first, for every row (used only where step 1 emitted one token)
    ps2 = torch.stack([P[first], P[first]], dim=1)  # position 1 after y; the bonus row is never read here
    qs2 = Q[first].unsqueeze(1)
    tok2 = torch.multinomial(qs2[:, 0], 1, generator=gen)
    acc2, nxt2 = verify(ps2, qs2, tok2, lengths2, generator=gen)
    second_next = first_emitted(tok2, acc2, nxt2)
    second = torch.where(acc >= 1, second_here, second_next)
    return first, second


def joint_target() -> np.ndarray:
    return (P1[:, None] * P).numpy().ravel()  # Pr(y1 = a, y2 = b) = p_1(a) P[a, b]


def test_two_token_sequence_follows_target_joint():
    gen = torch.Generator().manual_seed(11)
    lengths1 = torch.randint(0, 3, (N,), generator=gen)
    lengths2 = torch.randint(0, 2, (N,), generator=gen)
    y1, y2 = two_token_stream(lengths1, lengths2, gen)
    counts = counts_of(y1 * V + y2, V * V)
    assert counts[3 * V + 0] == 0 and counts[3 * V + 3] == 0  # P[3] gives tokens 0 and 3 no mass
    assert goodness_of_fit(counts, joint_target()) > PASS


# --- greedy (temperature 0) ------------------------------------------------------------------------------------


def greedy_reference(ps: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor):
    """Row by row, token by token: the plain statement of greedy verification."""
    acc, nxt = [], []
    for r in range(len(lengths)):
        k = 0
        while k < int(lengths[r]) and int(tokens[r, k]) == int(ps[r, k].argmax()):
            k += 1
        acc.append(k)
        nxt.append(int(ps[r, k].argmax()))
    return torch.tensor(acc), torch.tensor(nxt)


def test_greedy_accepts_exactly_the_argmax_prefix():
    gen = torch.Generator().manual_seed(3)
    rows, gamma = 400, 4
    ps = torch.rand(rows, gamma + 1, V, generator=gen, dtype=torch.float64)
    ps = ps / ps.sum(-1, keepdim=True)
    # drafts agree with the argmax 70% of the time, so blocks end at every position
    agree = torch.rand(rows, gamma, generator=gen) < 0.7
    tokens = torch.where(agree, ps[:, :gamma].argmax(-1), torch.randint(0, V, (rows, gamma), generator=gen))
    lengths = torch.randint(0, gamma + 1, (rows,), generator=gen)
    qs = torch.full((rows, gamma, V), 1.0 / V, dtype=torch.float64)
    accepted, nxt = verify_block(ps, qs, tokens, lengths, greedy=True)
    ref_acc, ref_nxt = greedy_reference(ps, tokens, lengths)
    assert torch.equal(accepted, ref_acc)
    assert torch.equal(nxt, ref_nxt)
    assert set(accepted.tolist()) == set(range(gamma + 1))


def test_greedy_stream_is_the_target_greedy_path():
    # At temperature 0 the target's output is deterministic: token 0 (argmax of P1), then P[0]'s argmax 0, ...
    gen = torch.Generator().manual_seed(5)
    rows = 2000
    lengths1 = torch.randint(0, 3, (rows,), generator=gen)
    lengths2 = torch.randint(0, 2, (rows,), generator=gen)
    greedy_verify = lambda *a, **k: verify_block(*a, **{**k, "greedy": True})  # noqa: E731
    y1, y2 = two_token_stream(lengths1, lengths2, gen, verify=greedy_verify)
    assert torch.all(y1 == 0) and torch.all(y2 == 0)


# --- edge cases -------------------------------------------------------------------------------------------------


def test_token_with_zero_draft_probability_is_accepted_when_target_allows_it():
    ps = torch.tensor([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]], dtype=torch.float64).repeat(1000, 1, 1)
    qs = torch.tensor([[[0.0, 0.2, 0.8]]], dtype=torch.float64).repeat(1000, 1, 1)
    lengths = torch.ones(1000, dtype=torch.long)
    gen = torch.Generator().manual_seed(0)
    acc0, _ = verify_block(ps, qs, torch.zeros(1000, 1, dtype=torch.long), lengths, generator=gen)
    assert torch.all(acc0 == 1)  # q(x) = 0 < p(x): min(1, p/q) = 1
    acc2, nxt2 = verify_block(ps, qs, torch.full((1000, 1), 2, dtype=torch.long), lengths, generator=gen)
    assert torch.all(acc2 == 0)  # p(x) = 0: never accepted
    # the correction comes from max(0, p - q) = (0.5, 0.3, 0): token 2 is impossible, 0 and 1 in ratio 5:3
    assert not torch.any(nxt2 == 2)
    assert 0.55 < float((nxt2 == 0).double().mean()) < 0.7
    # a token neither model can produce (p = q = 0) is not accepted either
    ps_none = torch.tensor([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]], dtype=torch.float64).repeat(1000, 1, 1)
    qs_none = torch.tensor([[[0.5, 0.5, 0.0]]], dtype=torch.float64).repeat(1000, 1, 1)
    acc_none, nxt_none = verify_block(ps_none, qs_none, torch.full((1000, 1), 2, dtype=torch.long), lengths,
                                      generator=gen)
    assert torch.all(acc_none == 0) and not torch.any(nxt_none == 2)


def test_draft_equal_to_target_accepts_everything_and_bonus_follows_target():
    gen = torch.Generator().manual_seed(1)
    ps, _, tokens = draft_block(N, 3, gen)
    qs = ps[:, :3].clone()  # the drafter proposes from the target's own distributions: p = q everywhere
    tokens = torch.multinomial(qs.reshape(-1, V), 1, generator=gen).reshape(N, 3)
    lengths = torch.randint(0, 4, (N,), generator=gen)
    accepted, nxt = verify_block(ps, qs, tokens, lengths, generator=gen)
    assert torch.equal(accepted, lengths)
    # bonus at length 0 is a plain target sample of position 1
    sel = lengths == 0
    assert goodness_of_fit(counts_of(nxt[sel], V), P1.numpy()) > PASS


def test_disjoint_supports_reject_everything_and_correct_from_target():
    p1 = dist(0.6, 0.4, 0.0, 0.0)
    q1 = dist(0.0, 0.0, 0.5, 0.5)
    gen = torch.Generator().manual_seed(2)
    tokens = torch.multinomial(q1.expand(N, V), 1, replacement=True, generator=gen)
    ps = torch.stack([p1, p1]).expand(N, 2, V)
    qs = q1.expand(N, 1, V)
    accepted, nxt = verify_block(ps, qs, tokens, torch.ones(N, dtype=torch.long), generator=gen)
    assert torch.all(accepted == 0)
    assert goodness_of_fit(counts_of(nxt, V), p1.numpy()) > PASS


def test_zero_length_is_plain_target_sampling_and_ignores_drafts():
    gen = torch.Generator().manual_seed(4)
    ps, qs, tokens = draft_block(N, 2, gen)
    garbage = torch.full_like(tokens, 3)  # tokens and q that would matter if anything were verified
    accepted, nxt = verify_block(ps, torch.zeros_like(qs), garbage, torch.zeros(N, dtype=torch.long), generator=gen)
    assert torch.all(accepted == 0)
    assert goodness_of_fit(counts_of(nxt, V), P1.numpy()) > PASS


def test_same_generator_seed_same_result_and_seeds_differ():
    ps, qs, tokens = draft_block(5000, 3, torch.Generator().manual_seed(9))
    lengths = torch.full((5000,), 3, dtype=torch.long)
    a1, n1 = verify_block(ps, qs, tokens, lengths, generator=torch.Generator().manual_seed(42))
    a2, n2 = verify_block(ps, qs, tokens, lengths, generator=torch.Generator().manual_seed(42))
    a3, n3 = verify_block(ps, qs, tokens, lengths, generator=torch.Generator().manual_seed(43))
    assert torch.equal(a1, a2) and torch.equal(n1, n2)
    assert not (torch.equal(a1, a3) and torch.equal(n1, n3))


def test_low_precision_inputs_are_verified_in_float32():
    gen = torch.Generator().manual_seed(6)
    ps, qs, tokens = draft_block(N, 2, gen)
    accepted, nxt = verify_block(ps.bfloat16(), qs.bfloat16(), tokens, torch.full((N,), 2), generator=gen)
    assert accepted.dtype == torch.long and nxt.dtype == torch.long
    # bf16 rounds the probabilities by < 0.4%: still well inside the chi-square at this N
    assert goodness_of_fit(counts_of(first_emitted(tokens, accepted, nxt), V), P1.numpy()) > PASS


def test_empty_batch_and_bad_shapes():
    acc, nxt = verify_block(torch.zeros(0, 3, V), torch.zeros(0, 2, V), torch.zeros(0, 2, dtype=torch.long),
                            torch.zeros(0, dtype=torch.long))
    assert acc.shape == (0,) and nxt.shape == (0,)
    ps, qs, tokens = draft_block(4, 2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="draft_probs"):
        verify_block(ps, qs[:, :1], tokens, torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="draft_tokens"):
        verify_block(ps, qs, tokens[:, :1], torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"lengths must lie in 0\.\.2"):
        verify_block(ps, qs, tokens, torch.full((4,), 3, dtype=torch.long))


# --- the statistics can fail: wrong rules are caught --------------------------------------------------------------


def verify_correcting_from_target(target_probs, draft_probs, draft_tokens, lengths, generator=None):
    """A classic bug: accept with min(1, p/q) but draw the correction from p instead of max(0, p - q)."""
    accepted, _ = verify_block(target_probs, draft_probs, draft_tokens, lengths, generator=generator)
    p_next = target_probs[torch.arange(len(lengths)), accepted]
    return accepted, torch.multinomial(p_next, 1, generator=generator).squeeze(-1)


def test_correction_from_target_instead_of_residual_is_caught():
    gen = torch.Generator().manual_seed(12)
    ps, qs, tokens = draft_block(N, 2, gen)
    lengths = torch.full((N,), 2, dtype=torch.long)
    acc, nxt = verify_correcting_from_target(ps, qs, tokens, lengths, generator=gen)
    assert goodness_of_fit(counts_of(first_emitted(tokens, acc, nxt), V), P1.numpy()) < CAUGHT
    # and the real rule on the same kind of sample passes
    ps, qs, tokens = draft_block(N, 2, gen)
    acc, nxt = verify_block(ps, qs, tokens, lengths, generator=gen)
    assert goodness_of_fit(counts_of(first_emitted(tokens, acc, nxt), V), P1.numpy()) > PASS


def test_lengths_that_peek_at_the_draft_token_are_caught():
    # Verify x_1 only when it is token 1 (the drafter likes it more than the target): Appendix A in miniature.
    gen = torch.Generator().manual_seed(13)
    ps, qs, tokens = draft_block(N, 2, gen)
    lengths = (tokens[:, 0] == 1).long()
    acc, nxt = verify_block(ps, qs, tokens, lengths, generator=gen)
    assert goodness_of_fit(counts_of(first_emitted(tokens, acc, nxt), V), P1.numpy()) < CAUGHT


def test_two_token_joint_catches_a_wrong_bonus_position():
    # Off by one: the bonus taken from the last verified token's position instead of the one after it.
    def verify_bonus_off_by_one(ps, qs, tokens, lengths, generator=None):
        shifted = torch.cat([ps[:, :1], ps[:, :-1]], dim=1)
        shifted_bonus = torch.where((torch.arange(ps.shape[1]) == 0)[None, :, None], ps, shifted)
        acc, nxt = verify_block(ps, qs, tokens, lengths, generator=generator)
        all_pass = acc == lengths
        bonus = torch.multinomial(shifted_bonus[torch.arange(len(acc)), acc], 1, generator=generator).squeeze(-1)
        return acc, torch.where(all_pass, bonus, nxt)

    gen = torch.Generator().manual_seed(14)
    lengths1 = torch.full((N,), 1, dtype=torch.long)
    lengths2 = torch.zeros(N, dtype=torch.long)
    y1, y2 = two_token_stream(lengths1, lengths2, gen, verify=verify_bonus_off_by_one)
    assert goodness_of_fit(counts_of(y1 * V + y2, V * V), joint_target()) < CAUGHT
