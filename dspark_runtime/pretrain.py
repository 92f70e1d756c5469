"""Training the tiny target: a Qwen3 causal LM trained from scratch on the corpus's training split (all three
domains, each record framed as a chat turn), packed into fixed-length sequences."""

from __future__ import annotations

import math
import random

import torch

from .corpus import Record
from .progress import Progress
from .tokenizer import format_record


def cosine_lr(step: int, total: int, peak: float, warmup_frac: float = 0.04) -> float:
    warm = max(1, int(total * warmup_frac))
    if step < warm:
        return peak * (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def packed_stream(records: list[Record], tokenizer, seed: int) -> torch.Tensor:
    order = list(records)
    random.Random(seed).shuffle(order)
    ids: list[int] = []
    for r in order:
        ids.extend(tokenizer(format_record(r.prompt, r.answer))["input_ids"])
    return torch.tensor(ids, dtype=torch.long)


def train_target(model, records: list[Record], tokenizer, *, steps: int, batch: int, seq_len: int, lr: float,
                 seed: int, progress: Progress) -> dict:
    stream = packed_stream(records, tokenizer, seed)
    n_chunks = (len(stream) - 1) // seq_len
    chunks = stream[: n_chunks * seq_len].view(n_chunks, seq_len)
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    losses = []
    progress(f"target: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
             f"{len(stream) / 1e3:.0f}k training tokens, {steps} steps of {batch}x{seq_len}")
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, lr)
        idx = torch.randint(0, n_chunks, (batch,), generator=gen)
        x = chunks[idx].to(device)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if progress.every(step, steps):
            recent = sum(losses[-20:]) / len(losses[-20:])
            progress(f"target step {step + 1}/{steps} loss {recent:.3f}")
    model.eval()
    return {"steps": steps, "tokens_seen": steps * batch * seq_len, "final_loss": sum(losses[-20:]) / len(losses[-20:])}
