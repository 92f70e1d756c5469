"""Training drafters by self-distillation from a frozen target.

Each step takes a batch of (prompt + regenerated answer) sequences, runs the target once (its hidden states at the
drafters' layers and its logits are taken on the fly), samples anchor positions per sequence inside the answer,
and updates every drafter being trained on those same blocks with the loss of losses.py. Training several drafters
on one stream shares the target forward, which is most of the cost on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .losses import LossWeights, drafter_loss
from .pretrain import cosine_lr
from .progress import Progress
from .target import TargetRunner


@dataclass
class DistillData:
    """Padded sequences (N, T) with the answer positions marked (loss_mask, answer tokens incl. EOS)."""

    input_ids: torch.Tensor
    loss_mask: torch.Tensor

    @classmethod
    def from_pairs(cls, prompts: list[list[int]], answers: list[list[int]], seq_len: int, pad_id: int) -> DistillData:
        ids = torch.full((len(prompts), seq_len), pad_id, dtype=torch.long)
        mask = torch.zeros(len(prompts), seq_len, dtype=torch.bool)
        for i, (p, a) in enumerate(zip(prompts, answers, strict=True)):
            seq = (p + a)[:seq_len]
            ids[i, : len(seq)] = torch.tensor(seq)
            mask[i, len(p): len(seq)] = True
        return cls(ids, mask)


def sample_anchors(loss_mask: torch.Tensor, num_anchors: int, generator: torch.Generator):
    """Up to num_anchors distinct anchor positions per sequence among those whose token and next token are both in
    the answer. Returns anchors (B, nb) sorted, and keep (B, nb) (False = padding)."""
    b, t = loss_mask.shape
    ok = loss_mask[:, :-1] & loss_mask[:, 1:]
    score = torch.rand(b, t - 1, generator=generator)
    score = torch.where(ok, score, torch.full_like(score, 2.0))
    order = score.argsort(dim=1)[:, :num_anchors]
    keep = torch.gather(ok, 1, order)
    anchors = torch.where(keep, order, torch.zeros_like(order))
    anchors, idx = anchors.sort(dim=1)
    return anchors, torch.gather(keep, 1, idx)


def block_targets(input_ids, loss_mask, target_logits, anchors, keep, gamma):
    """Labels x_{p+1..p+gamma} (B, nb, gamma), the valid prefix mask and the target's logits at the positions that
    predict them (B, nb, gamma, V)."""
    b, t = input_ids.shape
    pos = anchors[:, :, None] + torch.arange(1, gamma + 1, device=input_ids.device)
    inside = pos < t
    pos_c = pos.clamp(max=t - 1)
    nb = anchors.shape[1]
    labels = torch.gather(input_ids[:, None, :].expand(b, nb, t), 2, pos_c)
    in_answer = torch.gather(loss_mask[:, None, :].expand(b, nb, t), 2, pos_c)
    valid = (inside & in_answer & keep[:, :, None]).long().cumprod(-1).bool()
    pred = (pos_c - 1)[..., None].expand(-1, -1, -1, target_logits.shape[-1])
    tl = torch.gather(target_logits[:, None].expand(b, nb, t, -1), 2, pred)
    return labels, valid, tl


def train_drafters(runner: TargetRunner, drafters: dict, data: DistillData, *, steps: int, batch: int,
                   num_anchors: int, lr: float, seed: int, progress: Progress,
                   weights: LossWeights | None = None) -> dict[str, dict]:
    """Train every drafter in ``drafters`` (name -> module, already sharing the target's embeddings) jointly on the
    same batches and anchors. Returns per-drafter summaries (final loss terms)."""
    weights = weights or LossWeights()
    dev = runner.device
    gen = torch.Generator().manual_seed(seed)
    opts = {name: torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=lr, betas=(0.9, 0.95),
                                    weight_decay=0.0) for name, m in drafters.items()}
    history: dict[str, list[dict]] = {name: [] for name in drafters}
    gamma = {name: m.gamma for name, m in drafters.items()}
    for m in drafters.values():
        m.train()
    n = data.input_ids.shape[0]
    for step in range(steps):
        idx = torch.randint(0, n, (batch,), generator=gen)
        ids, mask = data.input_ids[idx], data.loss_mask[idx]
        length = int(mask.any(0).nonzero().max()) + 1  # trim trailing padding shared by the whole batch
        ids, mask = ids[:, :length].to(dev), mask[:, :length].to(dev)
        target_logits, features = runner.teacher_forced(ids)
        anchors, keep = sample_anchors(mask.cpu(), num_anchors, gen)
        anchors, keep = anchors.to(dev), keep.to(dev)
        for name, model in drafters.items():
            labels, valid, tl = block_targets(ids, mask, target_logits, anchors, keep, gamma[name])
            logits, conf = model.forward_train(ids, features, anchors, keep)
            loss, terms = drafter_loss(logits, tl, labels, valid, conf, weights)
            opt = opts[name]
            for group in opt.param_groups:
                group["lr"] = cosine_lr(step, steps, lr)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            history[name].append(terms)
        if progress.every(step, steps):
            parts = []
            for name, h in history.items():
                recent = h[-10:]
                parts.append(f"{name} loss {sum(x['loss'] for x in recent) / len(recent):.3f} "
                             f"acc~{sum(x['accept'] for x in recent) / len(recent):.3f}")
            progress(f"drafters step {step + 1}/{steps}: " + "; ".join(parts))
    summary = {}
    for name, m in drafters.items():
        m.eval()
        recent = history[name][-20:]
        summary[name] = {k: sum(x.get(k, 0.0) for x in recent) / len(recent) for k in recent[0]}
    return summary
