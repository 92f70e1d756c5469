"""Drafters: the teacher-forced block path (training) and the step-by-step drafting path give the same logits and
confidences for the same prefix tokens, for every sequential head, DFlash and the autoregressive baseline; batching
requests of different context lengths changes nothing; embeddings and LM head stay frozen."""

from __future__ import annotations

import pytest
import torch

from dspark_runtime.drafters import DSPARK_ARCH, EAGLE3_ARCH, build_drafter

from .conftest import randomize, small_config

VOCAB, F = 40, 64  # features: 2 target layers x hidden 32

CASES = {
    "dspark-vanilla": dict(head="vanilla"),
    "dspark-gated": dict(head="gated"),
    "dspark-rnn": dict(head="rnn"),
    "dflash": dict(head=None),
    "eagle3": dict(arch=EAGLE3_ARCH, head=None),
}


def sequence(batch: int = 2, length: int = 24, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (batch, length), generator=gen)
    feats = torch.randn(batch, length, F, generator=gen)
    return ids, feats


def step_by_step(model, ids, feats, p: int):
    """Draft one block at anchor position p through the drafting path, forced to the true tokens."""
    rows = torch.tensor([0])
    ctx = model.new_context(1, 64)
    model.add_context(ctx, rows, feats[None, :p], ids[None, 1: p + 1], torch.tensor([p]))
    forced = ids[None, p + 1: p + 1 + model.gamma]
    return model.propose(ctx, rows, ids[None, p], temperature=1.0, forced=forced)


@pytest.mark.parametrize("case", list(CASES))
def test_teacher_forced_equals_step_by_step(case):
    model = randomize(build_drafter(small_config(**CASES[case])))
    ids, feats = sequence()
    anchors = torch.tensor([[3, 8, 14], [5, 11, 17]])
    keep = torch.ones(2, 3, dtype=torch.bool)
    with torch.no_grad():
        logits, conf = model.forward_train(ids, feats, anchors, keep)
    assert logits.shape == (2, 3, model.gamma, VOCAB)
    assert (conf is not None) == (case.startswith("dspark"))
    for b in range(2):
        for i in range(3):
            prop = step_by_step(model, ids[b], feats[b], int(anchors[b, i]))
            torch.testing.assert_close(prop.logits[0], logits[b, i], atol=2e-5, rtol=1e-5)
            if conf is not None:
                torch.testing.assert_close(prop.confidence_logits[0], conf[b, i], atol=2e-5, rtol=1e-5)
            assert prop.tokens[0].tolist() == ids[b, anchors[b, i] + 1: anchors[b, i] + 1 + model.gamma].tolist()


@pytest.mark.parametrize("case", ["dspark-vanilla", "dspark-rnn", "eagle3"])
def test_the_sequential_head_matters(case):
    """Changing an earlier drafted token changes later logits for heads that condition on it (not for DFlash)."""
    model = randomize(build_drafter(small_config(**CASES[case])))
    ids, feats = sequence()
    a = step_by_step(model, ids[0], feats[0], 8)
    ids2 = ids.clone()
    ids2[0, 9] = (ids2[0, 9] + 1) % VOCAB  # the first drafted token
    b = step_by_step(model, ids2[0], feats[0], 8)
    torch.testing.assert_close(a.logits[0, 0], b.logits[0, 0])  # position 1 does not see it
    assert not torch.allclose(a.logits[0, 1], b.logits[0, 1])


def test_dflash_positions_are_independent_of_drafted_tokens():
    model = randomize(build_drafter(small_config(head=None)))
    ids, feats = sequence()
    a = step_by_step(model, ids[0], feats[0], 8)
    ids2 = ids.clone()
    ids2[0, 9:12] = 7
    b = step_by_step(model, ids2[0], feats[0], 8)
    torch.testing.assert_close(a.logits, b.logits)


@pytest.mark.parametrize("case", ["dspark-gated", "dflash", "eagle3"])
def test_batched_drafting_equals_one_request_at_a_time(case):
    """R requests with different context lengths in one padded batch draft exactly as each alone."""
    model = randomize(build_drafter(small_config(**CASES[case])))
    ids, feats = sequence(batch=3)
    p = [6, 15, 10]
    ctx = model.new_context(3, 64)
    rows = torch.arange(3)
    width = max(p)
    feat_pad = torch.zeros(3, width, F)
    after = torch.zeros(3, width, dtype=torch.long)
    for r in range(3):
        feat_pad[r, : p[r]] = feats[r, : p[r]]
        after[r, : p[r]] = ids[r, 1: p[r] + 1]
    model.add_context(ctx, rows, feat_pad, after, torch.tensor(p))
    forced = torch.stack([ids[r, p[r] + 1: p[r] + 1 + model.gamma] for r in range(3)])
    anchors = torch.stack([ids[r, p[r]] for r in range(3)])
    batched = model.propose(ctx, rows, anchors, 1.0, forced=forced)
    for r in range(3):
        alone = step_by_step(model, ids[r], feats[r], p[r])
        torch.testing.assert_close(batched.logits[r], alone.logits[0], atol=2e-5, rtol=1e-5)


def test_shared_embeddings_are_frozen():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    target = Qwen3ForCausalLM(Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                          num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                          tie_word_embeddings=True))
    model = build_drafter(small_config())
    model.share_target_embeddings(target)
    assert torch.equal(model.embed_tokens.weight, target.get_input_embeddings().weight)
    assert not model.embed_tokens.weight.requires_grad and not model.lm_head.weight.requires_grad
    ids, feats = sequence()
    logits, conf = model.forward_train(ids, feats, torch.tensor([[4, 9], [6, 12]]), torch.ones(2, 2, dtype=torch.bool))
    (logits.logsumexp(-1).sum() + conf.sum()).backward()
    assert model.embed_tokens.weight.grad is None and model.lm_head.weight.grad is None
    assert model.fc.weight.grad is not None and model.markov_head.markov_w1.weight.grad is not None


def test_config_names_the_bad_field():
    from simulator.errors import UserError

    cfg = small_config()
    cfg.markov_head_type = "lstm"
    with pytest.raises(UserError, match="markov_head_type"):
        cfg.validate("x/config.json")
    cfg = small_config(arch=DSPARK_ARCH)
    cfg.target_layer_ids = [0, 2]  # the final target layer (3 layers: 0..2)
    with pytest.raises(UserError, match=r"x/config.json: field target_layer_ids"):
        cfg.validate("x/config.json")
