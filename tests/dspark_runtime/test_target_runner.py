"""The batched target forward: requests with different context lengths and different numbers of new tokens, in
one padded forward over per-request KV caches, give the logits and features of plain one-request forwards; and
committing only an accepted prefix (the rollback) leaves the cache as if the rejected tokens were never seen."""

from __future__ import annotations

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from dspark_runtime.target import TargetRunner

V = 50


def tiny_target(seed: int = 0):
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, max_position_embeddings=128, tie_word_embeddings=True)
    return Qwen3ForCausalLM(cfg).eval()


def plain(model, runner, seq: list[int]):
    logits, feats = runner.teacher_forced(torch.tensor([seq]))
    return logits[0], feats[0]


def test_padded_batch_equals_single_requests():
    model = tiny_target()
    runner = TargetRunner(model, [0, 1])
    gen = torch.Generator().manual_seed(3)
    seqs = [torch.randint(3, V, (n,), generator=gen).tolist() for n in (9, 4, 13)]
    prompt_len = [5, 2, 10]
    cache = runner.new_cache(3, 32)
    rows = torch.arange(3)
    last, prompt_feats = runner.prefill(cache, rows, [s[:p] for s, p in zip(seqs, prompt_len, strict=True)])
    counts = torch.tensor([len(s) - p for s, p in zip(seqs, prompt_len, strict=True)])  # 4, 2, 3 new tokens
    new = torch.zeros(3, int(counts.max()), dtype=torch.long)
    for r, (s, p) in enumerate(zip(seqs, prompt_len, strict=True)):
        new[r, : len(s) - p] = torch.tensor(s[p:])
    logits, feats, _, _ = runner.forward(cache, rows, new, counts)
    for r, (s, p) in enumerate(zip(seqs, prompt_len, strict=True)):
        ref_logits, ref_feats = plain(model, runner, s)
        torch.testing.assert_close(last[r], ref_logits[p - 1], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(prompt_feats[r], ref_feats[:p], atol=1e-5, rtol=1e-4)
        n = len(s) - p
        torch.testing.assert_close(logits[r, :n], ref_logits[p:], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(feats[r, :n], ref_feats[p:], atol=1e-5, rtol=1e-4)
        assert feats.shape[-1] == 2 * 32


def test_commit_of_accepted_prefix_is_a_rollback():
    model = tiny_target(1)
    runner = TargetRunner(model, [1])
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, V, (n,), generator=gen).tolist() for n in (6, 3)]
    block = torch.randint(3, V, (2, 5), generator=gen)  # anchor + 4 drafts each
    cache = runner.new_cache(2, 32)
    rows = torch.arange(2)
    runner.prefill(cache, rows, prompts)
    _, _, nk, nv = runner.forward(cache, rows, block, torch.tensor([5, 5]))
    keep = torch.tensor([3, 1])  # request 0: anchor + 2 accepted; request 1: anchor only
    cache.commit(rows, nk, nv, keep)
    nxt = torch.tensor([[7], [9]])
    logits, _, _, _ = runner.forward(cache, rows, nxt, torch.tensor([1, 1]))
    for r in range(2):
        seq = prompts[r] + block[r, : keep[r]].tolist() + nxt[r].tolist()
        ref, _ = plain(model, runner, seq)
        torch.testing.assert_close(logits[r, 0], ref[-1], atol=1e-5, rtol=1e-4)
