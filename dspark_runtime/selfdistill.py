"""Self-distillation data: the target regenerates the answers to the training prompts (temperature 0.7, as the
paper's "recommended sampling parameters"), batched with per-request KV caches. Only token ids are stored; the
target's hidden states are recomputed on the fly while the drafters train (no feature cache)."""

from __future__ import annotations

import torch

from .progress import Progress
from .sampling import sample_tokens
from .target import TargetRunner


@torch.no_grad()
def generate(runner: TargetRunner, prompts: list[list[int]], *, max_new: int, temperature: float, eos_id: int,
             generator: torch.Generator | None = None) -> list[list[int]]:
    """Plain autoregressive sampling for a batch of prompts; each answer stops after EOS (kept) or max_new tokens."""
    dev = runner.device
    r = len(prompts)
    cache = runner.new_cache(r, max(len(p) for p in prompts) + max_new + 1)
    rows = torch.arange(r, device=dev)
    logits, _ = runner.prefill(cache, rows, prompts)
    out: list[list[int]] = [[] for _ in range(r)]
    active = rows
    tok = sample_tokens(logits, temperature, generator)
    for _ in range(max_new):
        for i, t in zip(active.tolist(), tok.tolist(), strict=True):
            out[i].append(t)
        keep = (tok != eos_id) & torch.tensor([len(out[i]) < max_new for i in active.tolist()], device=dev)
        active, tok = active[keep], tok[keep]
        if active.numel() == 0:
            break
        ones = torch.ones_like(active)
        logits, _, nk, nv = runner.forward(cache, active, tok[:, None], ones)
        cache.commit(active, nk, nv, ones)
        tok = sample_tokens(logits[:, 0], temperature, generator)
    return out


def regenerate(runner: TargetRunner, prompts: list[list[int]], *, max_new: int, temperature: float, eos_id: int,
               seed: int, batch: int, progress: Progress) -> list[list[int]]:
    gen = torch.Generator(device=runner.device).manual_seed(seed)
    answers: list[list[int]] = []
    for start in range(0, len(prompts), batch):
        answers.extend(generate(runner, prompts[start:start + batch], max_new=max_new, temperature=temperature,
                                eos_id=eos_id, generator=gen))
        progress(f"self-distillation: {len(answers)}/{len(prompts)} answers regenerated")
    return answers
