"""Speculative decoding with real models is lossless: at temperature 0 it reproduces the target's own greedy
output token for token (every drafter); at temperature 1 the emitted tokens follow the target's distribution
(chi-square on the second generated token, which passes through verification)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dspark_runtime.checkpoints import load_drafter
from dspark_runtime.chi_square import goodness_of_fit
from dspark_runtime.corpus import load_corpus
from dspark_runtime.rollouts import encode_prompts, eval_records
from dspark_runtime.selfdistill import generate
from dspark_runtime.speculative import SpeculativeDecoder


@pytest.mark.parametrize("kind", ["dspark", "dflash", "eagle3", "dspark-rnn"])
def test_greedy_speculative_equals_target_greedy(smoke_world, smoke_models, kind):
    paths, _size, _ = smoke_world
    target, runner, tok = smoke_models
    drafter, _ = load_drafter(paths.drafter(kind), target=target)
    records = eval_records(load_corpus(paths.corpus), "eval", 3)
    prompts = encode_prompts(tok, records)
    reference = generate(runner, prompts, max_new=20, temperature=0.0, eos_id=tok.eos_token_id)
    decoder = SpeculativeDecoder(runner, drafter, temperature=0.0, eos_id=tok.eos_token_id)
    out, recs = decoder.generate(prompts, max_new=20)
    assert out == reference
    assert all(0 <= r.accepted <= drafter.gamma for r in recs)
    emitted = sum(len(o) for o in out)
    assert emitted <= len(prompts) + sum(r.accepted + 1 for r in recs)  # tokens conserved (trimmed at the end)


def test_sampled_tokens_follow_the_target(smoke_world, smoke_models):
    paths, _, _ = smoke_world
    target, runner, tok = smoke_models
    drafter, _ = load_drafter(paths.drafter("dspark"), target=target)
    prompt = encode_prompts(tok, eval_records(load_corpus(paths.corpus), "eval", 1))[:1]
    n = 3000
    gen = torch.Generator().manual_seed(11)
    decoder = SpeculativeDecoder(runner, drafter, temperature=1.0, eos_id=None, generator=gen)
    out, _ = decoder.generate(prompt * n, max_new=2)
    first = np.array([o[0] for o in out])
    second = np.array([o[1] for o in out])
    # exact law of the second token: sum over first tokens t of p(t) p(. | t), from plain target forwards
    v = runner.vocab_size
    with torch.no_grad():
        p1 = torch.softmax(runner.teacher_forced(torch.tensor([prompt[0]]))[0][0, -1], -1)
        ts = torch.arange(v)
        batch = torch.cat([torch.tensor(prompt[0]).expand(v, -1), ts[:, None]], dim=1)
        p2 = (p1[:, None] * torch.softmax(runner.teacher_forced(batch)[0][:, -1], -1)).sum(0)
    assert goodness_of_fit(np.bincount(first, minlength=v), p1.numpy()) > 1e-3
    assert goodness_of_fit(np.bincount(second, minlength=v), p2.numpy()) > 1e-3


def test_per_request_verify_lengths_stay_lossless(smoke_world, smoke_models):
    """A scheduler may verify only l[r] of each block (0..gamma, different per request): still the target's greedy
    output, and no request ever accepts more than it verified."""
    paths, _, _ = smoke_world
    target, runner, tok = smoke_models
    drafter, _ = load_drafter(paths.drafter("dspark"), target=target)
    prompts = encode_prompts(tok, eval_records(load_corpus(paths.corpus), "eval", 3))
    reference = generate(runner, prompts, max_new=20, temperature=0.0, eos_id=tok.eos_token_id)
    gen = torch.Generator().manual_seed(2)

    def plan(conf, rows):
        assert conf is not None and conf.shape == (rows.numel(), drafter.gamma)
        return torch.randint(0, drafter.gamma + 1, (rows.numel(),), generator=gen)

    out, recs = SpeculativeDecoder(runner, drafter, temperature=0.0, eos_id=tok.eos_token_id).generate(
        prompts, max_new=20, plan=plan)
    assert out == reference
    assert all(r.accepted <= r.verified for r in recs) and any(r.verified < drafter.gamma for r in recs)
