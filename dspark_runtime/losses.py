"""The drafter training loss, as the DeepSpec code has it (docs/runtime.md, "Modules"):

    L = 0.1 CE + 0.9 L1 + 1.0 BCE

over block positions k = 0..gamma-1 weighted w_k = exp(-k / 4) (``decay``); each term is a w-weighted mean over the
valid positions (a contiguous prefix of each block: labels that exist and lie in the answer):
- CE: cross-entropy of the draft logits against the sequence's own next tokens;
- L1: || p_draft - p_target ||_1, both softmaxes at temperature 1;
- BCE: binary cross-entropy of the confidence head (logits) against c* = 1 - 0.5 L1, detached and clipped to [0, 1]
  (the per-position acceptance probability of standard speculative sampling). Only when there is a head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LossWeights:
    ce: float = 0.1
    l1: float = 0.9
    conf: float = 1.0
    decay: float = 4.0


def position_weights(gamma: int, decay: float, device=None) -> torch.Tensor:
    return torch.exp(-torch.arange(gamma, dtype=torch.float32, device=device) / decay)


def drafter_loss(draft_logits: torch.Tensor, target_logits: torch.Tensor, labels: torch.Tensor,
                 valid: torch.Tensor, conf_logits: torch.Tensor | None = None,
                 weights: LossWeights | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """draft_logits, target_logits (..., gamma, V); labels (..., gamma) long; valid (..., gamma) bool (a prefix);
    conf_logits (..., gamma) or None. Returns the loss and its terms (floats, for logging)."""
    weights = weights or LossWeights()
    gamma = draft_logits.shape[-2]
    w = position_weights(gamma, weights.decay, draft_logits.device) * valid.float()
    den = w.sum().clamp_min(1e-6)
    logp = F.log_softmax(draft_logits.float(), dim=-1)
    ce = -(logp.gather(-1, labels[..., None]).squeeze(-1))
    p_draft = logp.exp()
    p_target = torch.softmax(target_logits.float(), dim=-1)
    l1 = (p_draft - p_target).abs().sum(-1)
    ce_term = (ce * w).sum() / den
    l1_term = (l1 * w).sum() / den
    loss = weights.ce * ce_term + weights.l1 * l1_term
    terms = {"ce": float(ce_term.detach()), "l1": float(l1_term.detach()),
             "accept": float(((1 - 0.5 * l1.detach()) * valid).sum() / valid.sum().clamp_min(1))}
    if conf_logits is not None:
        c_star = (1.0 - 0.5 * l1).detach().clamp(0.0, 1.0)
        bce = F.binary_cross_entropy_with_logits(conf_logits.float(), c_star, reduction="none")
        conf_term = (bce * w).sum() / den
        loss = loss + weights.conf * conf_term
        terms["conf"] = float(conf_term.detach())
    terms["loss"] = float(loss.detach())
    return loss, terms
